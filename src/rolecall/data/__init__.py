"""Local datasets (DAPO-Math, GSM8K, DeepCoder, QA) -> validated `Problem`s; see docs/datasets.md."""
from rolecall.data.formats import FORMATS, RowIssue
from rolecall.data.load import LoadedDataset, LoadReport, describe_split, load_dataset, split_indices
from rolecall.data.readers import ACCEPTED_FORMS, DatasetError, read_rows

__all__ = ["ACCEPTED_FORMS", "FORMATS", "DatasetError", "LoadReport", "LoadedDataset", "RowIssue",
           "describe_split", "load_dataset", "read_rows", "split_indices"]
