"""Write the course guide's generated parts: reading times, exercises, the mistakes checks know.

Usage: python scripts/classroom_guide.py   (writes book/generated/course_checks.md, course_times.md)

The code is grading/classroom_guide.py, in the instructor's package (scripts/grading/); this file
is only its command.
"""

from grading.classroom_guide import main

if __name__ == "__main__":
    main()
