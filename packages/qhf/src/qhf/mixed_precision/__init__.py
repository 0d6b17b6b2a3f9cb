"""Mixed precision under a bits budget: per-module widths chosen from measured sensitivity.

A config with ``bits_budget`` (average stored bits per weight, e.g. ``4.25``; ``bits`` is then the base width)
is resolved, before the quantization loop, into the config's ``dynamic`` rules (``+:<pattern>: {"bits": b}``,
the rules GPT-QModel and vLLM read), so the saved ``quantization_config`` carries them and a run from the saved
config reproduces the checkpoint:

* :mod:`.settings`: the ``bits_budget`` / ``bits_candidates`` settings, checked when the config is read;
* :mod:`.units`: the allocation units (one decoder layer's modules reading one input; a layer's experts) and
  what each stores at each candidate width (the layout's own packed bytes);
* :mod:`.sensitivity`: one dense forward over a subset of the calibration rows, layer by layer, measuring each
  module's input power and its RTN noise-to-signal ratio per width (:func:`qalgos.sensitivity.rtn_noise_to_signal`);
* :mod:`.rules`: the chosen widths as ``dynamic`` rules;
* :mod:`.plan`: the whole step (checked before any work, resolved after calibration) and its record.

The allocation itself is :func:`qalgos.bit_allocation.allocate_bits`.
"""
