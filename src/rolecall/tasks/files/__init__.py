"""Local datasets (DAPO-Math, GSM8K, DeepCoder, QA) -> validated `Problem`s; see docs/datasets.md."""
from rolecall.tasks.files.formats import FORMATS, RowIssue
from rolecall.tasks.files.load import LoadedDataset, LoadReport, describe_split, load_dataset, split_indices
from rolecall.tasks.files.readers import ACCEPTED_FORMS, DatasetError, read_rows

__all__ = ["ACCEPTED_FORMS", "FORMATS", "DatasetError", "LoadReport", "LoadedDataset", "RowIssue",
           "describe_split", "load_dataset", "read_rows", "split_indices"]
