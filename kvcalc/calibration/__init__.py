"""Calibration: a serving engine's start-up log beside kvcalc's model of the same start-up.

- :mod:`~kvcalc.calibration.lines`: log lines cleaned of colours and prefixes, logged figures;
- :mod:`~kvcalc.calibration.vllm_log`, :mod:`~kvcalc.calibration.sglang_log`: each engine's log
  read into the figures it states (pure text in, data out);
- :mod:`~kvcalc.calibration.compare`: the terms side by side, the token count within the log's
  rounding, the inputs that reproduce it (kvcalc's vLLM terms from one function,
  :func:`~kvcalc.calibration.compare.kvcalc_vllm_terms`);
- :mod:`~kvcalc.calibration.calfile`: calibration.yaml written and read (safe, checked), and
  applied to a deployment's inputs (``--calibration``).

`kvcalc calibrate` and :func:`kvcalc.calibrate` are its front ends.
"""
