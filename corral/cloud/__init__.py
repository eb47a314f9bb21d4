"""corral's side of the cloud: the provider protocol, the openstacksdk provider and cloud-init user data."""
