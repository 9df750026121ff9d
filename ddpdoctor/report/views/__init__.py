"""The report's view model, one module per document kind (see ``report/viewmodel.py``, the entry)."""
