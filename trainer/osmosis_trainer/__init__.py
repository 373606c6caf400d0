"""osmosis's trainer: the layer that needs torch.

HF and vLLM engines (:mod:`osmosis_trainer.engines`, plugged into
``osmosis_ai.serving.create_engine`` through the ``osmosis.engines`` entry points),
token-exact trajectories, GRPO (:mod:`osmosis_trainer.grpo`), the training loop
(:mod:`osmosis_trainer.loop`), checkpoints, and the workflow that drives a remote rollout
server (:mod:`osmosis_trainer.server_workflow`). It imports the torch-free core
(``osmosis_ai``); core never imports it and starts training as ``python -m
osmosis_trainer.worker``.
"""
