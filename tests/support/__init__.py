"""Test helpers shared by the integration and reliability suites."""
