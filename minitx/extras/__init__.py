"""The extras: features beside the core, each in its own folder with its command.

An extra builds on the core (attention -> model -> decoding -> data -> training -> inference
-> viz -> cli) and nothing in the core imports an extra; an extra never imports another
extra. Its optional libraries (ctranslate2, Gradio) are imported only inside the functions
that need them, through `minitx.errors.require_extra`, so minitx works without them. Deleting
an extra's folder (and its console script in pyproject.toml) leaves the core whole.
"""
