"""`make lms`: the chapters' retrieval questions as Moodle XML, for a quiz or a question bank.

Usage: python scripts/export_questions.py [--format moodle] [--out _build/lms] [--chapters 4 6]
       python scripts/export_questions.py --review-table

The code is grading/export_questions.py, in the instructor's package (scripts/grading/); this
file is only its command.
"""

from grading.export_questions import main

if __name__ == "__main__":
    main()
