import { ApiError, messageOf } from '../api';
import { CopyButton, ErrorMessage } from './ui';

/*
 * A failed request as the Playground shows it: the message the client got and,
 * beside it, the id of the request the gateway refused or failed (its
 * `x-request-id`), which finds it in the request log; the id can be copied.
 */

export interface Failure {
  message: string;
  /** The gateway's id of the request, when it answered one (a check made in the page has none). */
  requestId?: string | null;
}

/** A caught error as a failure, with the request's id when the answer named one. */
export function failureOf(caught: unknown): Failure {
  return { message: messageOf(caught), requestId: caught instanceof ApiError ? caught.requestId : null };
}

/** The error banner of a Playground tab: the message, then the request's id and a copy button when there is one. */
export function RequestErrorMessage({ failure, onDismiss }: { failure: Failure | undefined; onDismiss?: () => void }) {
  const id = failure?.requestId;
  return (
    <ErrorMessage
      message={failure?.message}
      onDismiss={onDismiss}
      class="request-error"
      actions={id && <CopyButton text={id} label={`Copy the request ID ${id}`} class="request-copy" />}
    >
      {id && (
        <span class="request-error-id">
          {' '}
          (request <code>{id}</code>)
        </span>
      )}
    </ErrorMessage>
  );
}
