"""The query service: union queries over staged and migrated data at a batch watermark, the
safety checks around them, and the FastAPI app that ``streamdi serve`` hosts with the pipeline."""

from api.app import create_app
from api.service import QueryService
from api.union import UnionPlanner, UnionRequest

__all__ = ["QueryService", "UnionPlanner", "UnionRequest", "create_app"]
