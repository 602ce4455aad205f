"""YAML files read with their line numbers, and syntax errors that name the line to fix.

A foundation package: both the config (:mod:`tmy.config`) and the rulebook
(:mod:`tmy.rulebook`) read YAML through it. :mod:`tmy.yamlfile.source` loads a
file into line-aware mappings and lists; :mod:`tmy.yamlfile.hints` turns a
PyYAML syntax error into "line N: what is wrong, and how to fix it".
"""
