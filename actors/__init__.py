"""raydag's runtime adapters: settings, storage, the Ray supervisor and tool tasks, and the CLI.

Importing the package loads nothing heavy; Ray is imported only by the modules that use it.
"""
