"""What pollers see: run records, progress, liveness, the markers, and the answer for a request."""
