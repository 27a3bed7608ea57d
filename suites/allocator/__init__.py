"""Allocator conformance suite: modules mirror the chapters of the hybrid-allocator spec."""
