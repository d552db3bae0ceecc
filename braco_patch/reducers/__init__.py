"""In-LLM reducers: one file per method (the seam and the plugin kind come from the reducer branch)."""
