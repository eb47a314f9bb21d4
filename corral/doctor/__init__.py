"""`corral doctor`: check a configuration against the cloud, GitHub and the database it names, item by
item, with the fix for each failure. `run_doctor` is the whole command; `corral init` runs it on the file it
wrote."""

from corral.doctor.run import run_doctor

__all__ = ["run_doctor"]
