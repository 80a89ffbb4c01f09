"""The CTranslate2 extra: a minitx model exported to CTranslate2 (`export.py`) and its
command `minitx-ct2` (`command.py`); ctranslate2 itself is optional (``minitx[export]``)."""
