"""Serving: terminal chat, the web chat page, and upstream's controller / model-worker setup.

Entry points (each ``python -m llava.serve.<name>``): ``cli``, ``demo`` (page + model in one process),
``controller``, ``model_worker``, ``gradio_web_server``. Shared pieces: ``generation`` (the streaming loop),
``engine`` (request checks and the worker API semantics), ``backends`` (where the page gets answers),
``chat_ui`` (the page), ``panels`` (the compressor panel), ``images`` (upload checks), ``protocol`` (wire
format), ``templates``, ``webapi``. See docs/SERVING.md.
"""
