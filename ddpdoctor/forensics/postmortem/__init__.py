"""A finished (or stopped) job explained from what it left: torchrun's log dir, error files, flight-recorder
dumps and, if saved, torchrun's own output; the engine of `ddpdoctor postmortem` and of run-trainer's end."""
