"""`make classroom`: the student and instructor editions of every lab and their autograders.

Usage: python scripts/classroom.py [--out _build/classroom] [--seed N] [--release NAME]
                                   [notebooks/NN_name.ipynb ...]

The code is the instructor's package, scripts/grading/ (grading/classroom.py and the modules it
names); this file is only its command.
"""

from grading.classroom import main

if __name__ == "__main__":
    main()
