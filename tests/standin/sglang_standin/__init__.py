"""TEST STAND-IN for SGLang: see README.md beside this package."""
