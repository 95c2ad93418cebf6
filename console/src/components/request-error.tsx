import { useEffect, useState } from 'preact/hooks';
import { ApiError, messageOf } from '../api';
import { ErrorMessage } from './ui';

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

function CopyId({ id }: { id: string }) {
  const [copied, setCopied] = useState<'yes' | 'no' | undefined>(undefined);
  useEffect(() => setCopied(undefined), [id]);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(id);
      setCopied('yes');
    } catch {
      // No clipboard (an insecure origin, a refusal): the id stays selectable.
      const text = document.querySelector(`[data-request-id="${CSS.escape(id)}"]`);
      if (text) window.getSelection()?.selectAllChildren(text);
      setCopied('no');
    }
  };
  return (
    <button type="button" class="button button-secondary button-small request-copy" onClick={copy} aria-label={`Copy the request ID ${id}`}>
      {copied === 'yes' ? 'Copied' : copied === 'no' ? 'Selected: press Ctrl+C' : 'Copy ID'}
    </button>
  );
}

/** The error banner of a Playground tab: the message, then the request's id and a copy button when there is one. */
export function RequestErrorMessage({ failure, onDismiss }: { failure: Failure | undefined; onDismiss?: () => void }) {
  const id = failure?.requestId;
  return (
    <ErrorMessage message={failure?.message} onDismiss={onDismiss} class="request-error" actions={id && <CopyId id={id} />}>
      {id && (
        <span class="request-error-id">
          {' '}
          (request <code data-request-id={id}>{id}</code>)
        </span>
      )}
    </ErrorMessage>
  );
}
