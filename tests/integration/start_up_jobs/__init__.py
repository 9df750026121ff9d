"""Jobs whose start-up after init_process_group outlasts run-trainer's hang threshold (issue 45 item 2): the
scripts users run, as they run them."""
