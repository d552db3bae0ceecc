"""Serving: command-line chat (``python -m llava.serve.cli``), and the controller, worker and web demo."""
