"""Bridges to other systems (PostgreSQL / pgvector, LangChain, LlamaIndex).

Each module imports its optional dependency lazily and names the extra to install.
Integrations use only vecsift's public API.
"""
