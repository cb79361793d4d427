"""Figures for the book pages, one module per chapter, each with a ``main(outdir)``."""
