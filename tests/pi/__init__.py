"""Tests of the Pi extension with the real Pi binary (integrations/pi)."""
