"""Models: what a preset names, and turning it into ready OpenVINO IR folders on this machine.

  presets.py            models.yaml's schema (pydantic) and readable errors
  sources.py            ModelStore: pypi / gguf / hub / export / local -> IR folder, atomic and locked
  formats.py            weight formats of GGUF-derived IR (f16, int8, int4) and `format: auto`
  gguf_rewrite.py       re-quantize GGUF tensors OpenVINO cannot read (Q5_0 -> Q4_0)
  gguf_header.py        a GGUF header read fast (metadata fields, tensor infos), no gguf-py parse
  prepare.py            prepare_preset: a preset's main and draft, checked to share a tokenizer
  calibration_store.py  this machine's saved calibrations, read back (demo.calibrate writes them)
  calibration_result.py  a calibration, typed (Calibration): its JSON form, old versions included
  load_store.py         where speculation stops paying under load here (demo.bench.load writes it)
"""
