"""Where diffusers' TorchTPU integration imports from (``torch_tpu._internal.compile``)."""
