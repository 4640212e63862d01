"""DDP communication hooks: ``(state, bucket) -> Future[Tensor]`` (torch's convention)."""
