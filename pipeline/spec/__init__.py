"""Study and campaign files -> validated, frozen configurations (one-line errors naming file and field), and the
epoch rules."""
