"""Grading that an instructor can use for marks (scripts/grade.py is the command).

Modules, in the order a notebook goes through them:

    discover.py   who handed in which lab: folders per student, LMS download names, duplicates
    sandbox.py    a fresh, isolated ``python3`` kernel: scrubbed environment, temporary home and
                  working folder, memory and file-size limits, no network where Linux allows
    execute.py    runs a notebook top to bottom in that kernel, one cell at a time with its own
                  time limit, and after each exercise captures the answer (and calls the
                  learner's function on hidden inputs) into a file
    judge.py      in the grader's own process: the pristine checkers judge the captured answers;
                  tampering, pasted solutions, method limits and out-of-order notebooks are flagged
    gradebook.py  the CSV files and one feedback file per student, in a new dated folder
    points.toml   points and time limits per exercise, in one place
"""
