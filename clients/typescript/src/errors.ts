import type { components } from "./schema.js";

/** The body of every refusal the server sends: {code, field, error, hint} (docs/errors.md). */
export type ErrorBody = components["schemas"]["ErrorBody"];

/** RCLL's error codes and what kind of refusal each is (docs/errors.md; the server's rcll.errors.CODES). */
export const ErrorCodes = {
  RC001: "invalid_input",
  RC002: "unknown_bank",
  RC003: "not_found",
  RC004: "conflict",
  RC005: "version_conflict",
  RC006: "not_permitted",
  RC007: "too_broad",
  RC008: "invalid_stream",
  RC009: "unauthenticated",
  RC010: "unavailable",
} as const;

export type ErrorCode = keyof typeof ErrorCodes;
export type ErrorKind = (typeof ErrorCodes)[ErrorCode];

/** One problem of a request that does not match the schema (RC001 lists every one). */
export interface FieldProblem {
  field: string;
  error: string;
}

/**
 * A refusal, as a value: decide by `code` (or `kind`), never by the words of `message`, which may
 * be reworded while the codes keep their meaning.
 */
export class RcllError extends Error {
  override readonly name = "RcllError";
  /** RC001 ... RC010, or null when the answer did not come from RCLL (a proxy's HTML page, say). */
  readonly code: ErrorCode | null;
  /** The code's kind ("invalid_input", "version_conflict", ...), null with the code. */
  readonly kind: ErrorKind | null;
  /** The field at fault ("bank", "expected_version", "line 3", ...), null when no one field is. */
  readonly field: string | null;
  /** The fix, in words. */
  readonly hint: string | null;
  /** The HTTP status; 0 when the server was not reached at all. */
  readonly status: number;
  /** Every problem of a request the schema refused (RC001), the first of them in field and message. */
  readonly errors: readonly FieldProblem[];
  /** Seconds to wait before retrying, from Retry-After (RC010), else null. */
  readonly retryAfter: number | null;

  constructor(init: {
    code: ErrorCode | null;
    field: string | null;
    message: string;
    hint: string | null;
    status: number;
    errors?: readonly FieldProblem[];
    retryAfter?: number | null;
    cause?: unknown;
  }) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.code = init.code;
    this.kind = init.code === null ? null : ErrorCodes[init.code];
    this.field = init.field;
    this.hint = init.hint;
    this.status = init.status;
    this.errors = init.errors ?? [];
    this.retryAfter = init.retryAfter ?? null;
  }

  /** The server's own shape: {code, field, error, hint}. */
  toJSON(): { code: ErrorCode | null; field: string | null; error: string; hint: string | null } {
    return { code: this.code, field: this.field, error: this.message, hint: this.hint };
  }
}

function isCode(value: unknown): value is ErrorCode {
  return typeof value === "string" && Object.hasOwn(ErrorCodes, value);
}

function text(value: unknown): string | null {
  return typeof value === "string" ? value : null;
}

/** A refused response as an RcllError: the body's fields when it is RCLL's, the status otherwise. */
export async function errorFrom(response: Response): Promise<RcllError> {
  const raw = await response.text();
  let body: unknown = null;
  try {
    body = JSON.parse(raw);
  } catch {
    // Not JSON: something between the client and RCLL answered; keep its first line.
  }
  const retry = Number.parseFloat(response.headers.get("retry-after") ?? "");
  const retryAfter = Number.isFinite(retry) ? retry : null;
  if (body !== null && typeof body === "object" && isCode((body as Record<string, unknown>)["code"])) {
    const b = body as Record<string, unknown>;
    const errors = Array.isArray(b["errors"])
      ? (b["errors"] as unknown[]).flatMap((e) => {
          const p = e as Record<string, unknown>;
          const field = text(p?.["field"]);
          const error = text(p?.["error"]);
          return field !== null && error !== null ? [{ field, error }] : [];
        })
      : [];
    return new RcllError({
      code: b["code"] as ErrorCode,
      field: text(b["field"]),
      message: text(b["error"]) ?? `HTTP ${response.status}`,
      hint: text(b["hint"]),
      status: response.status,
      errors,
      retryAfter,
    });
  }
  const first = raw.trim().split("\n", 1)[0] ?? "";
  return new RcllError({
    code: null,
    field: null,
    message: `HTTP ${response.status} ${response.statusText}`.trim() + (first ? `: ${first.slice(0, 200)}` : ""),
    hint: "the answer did not come from RCLL: check the base URL and anything between the client and the server",
    status: response.status,
    retryAfter,
  });
}
