"""The engine: pipelines, the race, admission, the native safety record and the Arena front door."""
