"""One error body for every refusal of the service: ``{"error": "<what is wrong and what to do>"}``.

Invalid parameters (422) add ``problems``, one ``{"location", "message"}`` per parameter. The
auth/rate-limit guard, the stream endpoints, FastAPI's own errors (404 route, 405 method,
422 validation, HTTPException) and unexpected failures (500) all answer in this shape (docs/api.md, "Errors").
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException


class Problem(BaseModel):
    """One invalid parameter."""

    location: str
    message: str


class ErrorBody(BaseModel):
    """The body of every 4xx/5xx answer of the service."""

    error: str
    problems: list[Problem] | None = None


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """A JSON error answer in the service's one shape."""
    return JSONResponse({"error": message}, status, headers=headers)


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    return error_response(exc.status_code, detail, dict(exc.headers or {}))


async def _invalid(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = [_problem(error) for error in exc.errors()]
    summary = "; ".join(f"{p['location']}: {p['message']}" for p in problems)
    return JSONResponse({"error": f"invalid request: {summary}", "problems": problems}, 422)


async def _internal(_: Request, exc: Exception) -> JSONResponse:
    return error_response(500, f"internal error ({type(exc).__name__}); the service log has the details "
                               "(docs/runbooks/serve.md)")


def _problem(error: dict[str, Any]) -> dict[str, str]:
    return {"location": ".".join(str(part) for part in error.get("loc", ())),
            "message": str(error.get("msg", "invalid"))}


def install(app: FastAPI) -> None:
    """Answer FastAPI's and Starlette's errors in the service's shape."""
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(Exception, _internal)


RESPONSES: dict[int | str, dict[str, Any]] = {
    422: {"model": ErrorBody, "description": "invalid parameters (`problems` lists each)"}}
