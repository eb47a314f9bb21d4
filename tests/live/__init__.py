"""The live suite: corral's OpenStack provider against a real OpenStack (`bash scripts/live.sh`)."""
