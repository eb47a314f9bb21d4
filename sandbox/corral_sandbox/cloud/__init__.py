"""The OpenStack side of the sandbox: Keystone, Nova, Glance, Neutron and Cinder subsets."""
