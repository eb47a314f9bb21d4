"""`corral simulate` (issue 27): replaying a job history against a config in virtual time.

So far this holds the job trace the simulation will replay (`trace`): its format and its reader. The engine
in virtual time comes later.
"""
