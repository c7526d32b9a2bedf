"""What a job costs before it runs: FLOPs, GPU-hours, memory per GPU and the preflight that checks them."""
