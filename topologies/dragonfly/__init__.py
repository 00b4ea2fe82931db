"""Slingshot-style dragonfly fabrics: the layout (build) and routing by arithmetic on it
(routing).
"""
