"""`make grade`: grade handed-in labs for marks into a new dated folder under _build/grades.

Usage: python scripts/grade.py SUBMISSIONS [--out _build/grades] [--labs 04_causal_mask,...]
                               [--jobs N] [--seed N] [--name FOLDER]

The code is the instructor's package, scripts/grading/ (grading/grade.py and the modules it
names); this file is only its command.
"""

from grading.grade import main

if __name__ == "__main__":
    main()
