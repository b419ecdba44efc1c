"""GLUE: the tasks' data, the task module and their metrics."""
