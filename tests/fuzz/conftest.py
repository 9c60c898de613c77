"""The fuzz folder's hypothesis profiles are registered by fuzz_profiles (imported here, so
they exist before any test module of this folder is collected)."""
import fuzz_profiles  # noqa: F401
