"""The instructor's tools: classroom editions, grading for marks, the course guide, the LMS export.

One package, apart from the library (src/attnbook never imports it), with no import circle
(tests/test_instructor_package.py checks both). Each command in scripts/ is a thin entry point
to the module of the same name here: scripts/classroom.py runs classroom.main, scripts/grade.py
grade.main, scripts/classroom_guide.py classroom_guide.main and scripts/export_questions.py
export_questions.main. The modules, each importing only those listed above it:

    labs.py             a lab's graded exercises (an exercise cell, its check, its solution
                        cells) and their checkers, as everything below reads them
    handouts.py         the student edition (no solutions, nothing that gives an answer away)
                        and the instructor edition (grading notes), stamped with their edition
    autograder.py       Otter-Grader's tests and Gradescope zip for a lab
    discover.py         who handed in which lab: folders per student, LMS download names,
                        duplicates
    sandbox.py          a fresh, isolated ``python3`` kernel: scrubbed environment, temporary
                        home and working folder, memory and file-size limits, no network where
                        Linux allows (kernel_launcher.py starts it; in_kernel.py runs inside it)
    execute.py          runs a notebook top to bottom in that kernel, one cell at a time with its
                        own time limit, and after each exercise captures the answer (and calls
                        the learner's function on hidden inputs) into a file
    judge.py            in the grader's own process: the pristine checkers judge the captured
                        answers; tampering, pasted solutions, method limits and out-of-order
                        notebooks are flagged
    editions.py         which edition a hand-in is; a term's frozen release (releases/) and the
                        checks that grade it (``python scripts/grading/editions.py NAME COMMIT
                        LAB`` freezes an earlier term's)
    gradebook.py        the CSV files and one feedback file per student, in a new dated folder
    classroom.py        ``make classroom``: every lab's editions and autograders, and a release
    grade.py            ``make grade``: every hand-in through discover, editions, execute, judge
                        and gradebook
    classroom_guide.py  the course guide's generated tables (reading times, the mistakes the
                        checks recognise)
    export_questions.py ``make lms``: the chapters' questions as Moodle XML (needs only the
                        book's packages)
    points.toml         points and time limits per exercise, in one place

Outside the package they import only scripts/nbtools.py (how a solution cell starts),
scripts/set_repository.py (pinning a setup cell), scripts/main_line_words.py (the word count)
and the book's Sphinx extensions in _ext/ (the questions' loader, the site's commit).
"""
