"""A run's setup, resolved once before any model call.

- :mod:`.model`: what one model's run is made of (data model, template, checker, provider,
  fingerprints), the canary's grading, and the hand-over of preflight's result to the flows;
- :mod:`.judge_agreement`: the task that grades a judge's calibration file before the models run.
"""
