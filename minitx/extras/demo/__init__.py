"""The demo extra: the live demo page of a `Translator` (`page.py`, Gradio, optional:
``minitx[demo]``) and its command `minitx-demo` (`command.py`)."""
