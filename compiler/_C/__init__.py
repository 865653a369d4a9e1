"""`triton._C`: the parts of Triton's native module that tutorials and users call directly."""
