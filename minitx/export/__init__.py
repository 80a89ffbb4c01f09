"""Exporting trained minitx models to other runtimes (each in its own module, optional
libraries imported lazily)."""
