"""Front ends: PyTorch models (float, or quantized by torch.ao) to a :class:`QuantizedModel`."""
