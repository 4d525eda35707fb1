"""Test support: scripted upstream DNS servers and helpers to drive them from pytest."""
