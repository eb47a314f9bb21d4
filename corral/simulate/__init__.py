"""`corral simulate` (issue 27): replaying a job history against a config in virtual time.

So far this holds the job trace the simulation will replay (`trace`): its format, its reader, and the lines
`corral jobs export` writes from corral's own store. The engine in virtual time comes later.
"""
