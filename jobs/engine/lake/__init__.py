"""The lake tier of any pipeline: its tables loaded, its gold tables built, its views reconciled."""
