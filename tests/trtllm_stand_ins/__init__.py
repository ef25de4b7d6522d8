"""Stand-ins for NVIDIA's TensorRT-LLM Triton models, written from the interface facts of
``/work/shared/reference/tensorrt-llm-contract.md`` (none of NVIDIA's code is used); the models
themselves are in ``tests/triton_models_trtllm`` (its README says what each one does).

Why the code lives here rather than beside each ``model.py``: several stand-ins share it
(``tensorrt_llm`` and ``tensorrt_llm_nd`` are one model in two transaction modes, the BLS pair
differs by one parameter), and a Triton model repository loads every directory it holds as a model,
so shared modules cannot sit inside it. Each ``model.py`` puts the repository root on ``sys.path``
(its ``stand_in_python_path`` parameter) and delegates to a ``triton_*.py`` module here. Those are
the only modules that import ``triton_python_backend_utils``; everything else is plain Python (torch
where it generates) that the unit tests import without Triton.

* ``build.py``: the committed assets (the tiny-sp tokenizer, the TensorRT-LLM-format adapters).
* ``tokenizer.py``, ``words.py``, ``prepost.py``: what preprocessing and postprocessing do to text.
* ``errors.py``, ``sampling.py``, ``request_tensors.py``, ``lora.py``, ``kv_blocks.py``,
  ``guides.py``, ``responses.py``: the ``tensorrt_llm`` request checks, adapter cache, prefix-block
  bookkeeping, guides and response tensors.
* ``engine.py``, ``generation.py``, ``scheduler.py``, ``executor.py``: tiny-llm's weights
  generating one token per step under one scheduler thread per model instance.
* ``bls.py``, ``llmapi.py``, ``v05.py``: the BLS, LLM-API and v0.5-ensemble rules.
* ``reference.py``: the reference model's helpers (sampler, bad words) made importable.
* ``triton_io.py``, ``triton_calls.py`` and ``triton_<model>.py``: the Triton side.
"""
