import type { TargetedSubmitEvent } from 'preact';
import { useState } from 'preact/hooks';
import { api, messageOf } from '../api';
import { useAccount, useApp, useTeam } from '../app-context';
import { type Column, DataTable, TableSection } from '../components/data-table';
import {
  Dialog,
  ChoiceSelect,
  DialogFormActions,
  ErrorMessage,
  FormCard,
  InputField,
  PageHeader,
  useApi,
  useSending,
  useTitle,
} from '../components/ui';
import { count, dateTime } from '../format';
import { mayManageTeam, roleNames, teamName } from '../teams';
import type { TeamDetail, TeamList, TeamMember, TeamRole } from '../types';

/*
 * The Team page: who is in the current team and as what. Everybody in a team reads the list; its owners (and admins,
 * who own every team) add people by email, change their roles and remove them, and rename a team made for several
 * people. An admin also sees every team of the gateway with its number of members, and makes new ones. The server
 * decides and refuses (a last owner stays, with its reason said as it says it); the page only offers what the person's
 * role may do.
 */

const roles: TeamRole[] = ['owner', 'member', 'viewer'];

const sourceNames: Record<NonNullable<TeamMember['source']>, string> = {
  console: 'Console',
  admin: 'Admin',
  oidc: 'Sign-in provider',
};

/** Who a member is as a line says them: their email, else their name. */
const memberLabel = (member: TeamMember) => member.email || member.name || member.id;

/** A member's role, one of `roles`. */
function RoleSelect(props: { id: string; value: TeamRole; onChange: (role: TeamRole) => void; disabled?: boolean }) {
  return <ChoiceSelect choices={roles} names={roleNames} {...props} />;
}

/** Adds someone who has an account here to the team, by their email. */
function AddMemberForm({
  teamId,
  onAdded,
  onStart,
}: {
  teamId: string;
  onAdded: (member: TeamMember) => void;
  onStart: () => void;
}) {
  const [email, setEmail] = useState('');
  const [role, setRole] = useState<TeamRole>('member');
  const { busy, error, setError, send } = useSending();

  const submit = (event: TargetedSubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    // What the page said of an earlier change is not left beside this one's outcome.
    onStart();
    if (!email.trim()) return setError('Enter the email address of the person to add.');
    void send(async () => {
      const member = await api<TeamMember>('POST', `/teams/${encodeURIComponent(teamId)}/members`, {
        email: email.trim(),
        role,
      });
      setEmail('');
      setRole('member');
      onAdded(member);
    });
  };

  return (
    <FormCard
      id="add-member-heading"
      title="Add member"
      class="team-form"
      onSubmit={submit}
      error={error}
      busy={busy}
      submit="Add member"
    >
      <InputField
        id="member-email"
        label="Email"
        type="email"
        required
        wide
        value={email}
        onValue={setEmail}
        hint="They need an account on this gateway first."
      />
      <div class="field">
        <label for="member-role">Role</label>
        <RoleSelect id="member-role" value={role} onChange={setRole} />
      </div>
    </FormCard>
  );
}

/** An admin makes a team, with its first owner when one is named (else the admin, who owns every team, adds people). */
function NewTeamForm({ onCreated, onStart }: { onCreated: (team: TeamDetail) => void; onStart: () => void }) {
  const [name, setName] = useState('');
  const [owner, setOwner] = useState('');
  const { busy, error, setError, send } = useSending();

  const submit = (event: TargetedSubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    onStart();
    if (!name.trim()) return setError('Enter the name of the new team.');
    void send(async () => {
      const team = await api<TeamDetail>('POST', '/teams', {
        name: name.trim(),
        ...(owner.trim() ? { owner_email: owner.trim() } : {}),
      });
      setName('');
      setOwner('');
      onCreated(team);
    });
  };

  return (
    <FormCard
      id="new-team-heading"
      title="New team"
      class="team-form"
      onSubmit={submit}
      error={error}
      busy={busy}
      submit="Create team"
    >
      <InputField id="team-name" label="Team name" type="text" required wide value={name} onValue={setName} />
      <InputField
        id="team-owner"
        label="First owner’s email"
        type="email"
        wide
        value={owner}
        onValue={setOwner}
        hint="Optional. They manage its members from then on."
      />
    </FormCard>
  );
}

/**
 * Renames a team made for several people (its owners' and admins'); the server refuses a name taken or one the sign-in
 * provider's map gives.
 */
function RenameTeamDialog({
  teamId,
  current,
  onClose,
  onRenamed,
}: {
  teamId: string;
  current: string;
  onClose: () => void;
  onRenamed: (team: TeamDetail) => void;
}) {
  const [name, setName] = useState(current);
  const { busy, error, setError, send } = useSending();

  const submit = (event: TargetedSubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    if (!name.trim()) return setError('Enter the team’s new name.');
    void send(async () =>
      onRenamed(await api<TeamDetail>('PATCH', `/teams/${encodeURIComponent(teamId)}`, { name: name.trim() })),
    );
  };

  return (
    <Dialog title="Rename team" onClose={onClose}>
      <form onSubmit={submit} noValidate>
        <div class="field">
          <label for="team-rename">Team name</label>
          <input
            id="team-rename"
            type="text"
            required
            value={name}
            onInput={(e) => setName(e.currentTarget.value)}
            autoComplete="off"
          />
        </div>
        <ErrorMessage message={error} />
        <DialogFormActions onCancel={onClose} busy={busy} submit="Rename" />
      </form>
    </Dialog>
  );
}

type TeamRow = NonNullable<TeamList['all_teams']>[number];

/** Every team of the gateway with its number of members (an admin's), and a way to work in one. */
function AllTeams({ onCreated, onStart }: { onCreated: (team: TeamDetail) => void; onStart: () => void }) {
  const { teams, team: current, switchTeam } = useApp();
  const list = teams?.all_teams ?? undefined;
  const columns: Column<TeamRow>[] = [
    {
      id: 'name',
      label: 'Team',
      lead: true,
      class: 'cell-strong team-name-cell',
      title: (row) => row.name,
      cell: (row) => row.name,
    },
    { id: 'members', label: 'Members', numeric: true, cell: (row) => count(row.members) },
    { id: 'created', label: 'Made', priority: 'wide', class: 'nowrap', cell: (row) => dateTime(row.created) },
    {
      id: 'actions',
      label: 'Actions',
      hideLabel: true,
      actions: true,
      class: 'row-actions',
      cell: (row) =>
        row.id === current?.id ? (
          <span class="muted small">Current</span>
        ) : (
          <button
            type="button"
            class="button button-secondary button-small"
            onClick={() => switchTeam(row.id)}
            aria-label={`Work in ${row.name}`}
          >
            Work in it
          </button>
        ),
    },
  ];
  return (
    <>
      <section class="section" aria-labelledby="all-teams-heading">
        <div class="section-head">
          <h2 id="all-teams-heading">Teams</h2>
          <span class="muted">{list ? `${list.length} team${list.length === 1 ? '' : 's'}` : '\u00a0'}</span>
        </div>
        <p class="section-note muted small">
          Every team of this gateway. Each holds its own balance and keys; people are added to it by its owners.
        </p>
        <DataTable
          labelledBy="all-teams-heading"
          class="table-compact team-table"
          columns={columns}
          rows={list}
          rowKey={(row) => row.id}
          skeletonRows={2}
          empty="No teams yet. Make one below."
        />
      </section>
      <NewTeamForm onCreated={onCreated} onStart={onStart} />
    </>
  );
}

export function TeamPage() {
  useTitle('Team');
  const me = useAccount();
  const team = useTeam();
  const { refreshTeams } = useApp();
  const detail = useApi<TeamDetail>(`/teams/${encodeURIComponent(team.id)}`);
  const [status, setStatus] = useState<string | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const [busyId, setBusyId] = useState<string | undefined>(undefined);
  const [removing, setRemoving] = useState<TeamMember | undefined>(undefined);
  const [renaming, setRenaming] = useState(false);
  const manage = mayManageTeam(team.role);
  const name = teamName(team, me.id);
  const members = detail.data?.members;

  const replace = (member: TeamMember) =>
    detail.setData(
      (previous) =>
        previous && { ...previous, members: previous.members.map((m) => (m.id === member.id ? member : m)) },
    );

  const changeRole = async (member: TeamMember, role: TeamRole) => {
    if (role === member.role) return;
    setBusyId(member.id);
    setError(undefined);
    setStatus(undefined);
    try {
      replace(
        await api<TeamMember>(
          'PATCH',
          `/teams/${encodeURIComponent(team.id)}/members/${encodeURIComponent(member.id)}`,
          { role },
        ),
      );
      setStatus(`${memberLabel(member)} is now ${roleNames[role].toLowerCase()} of ${name}.`);
      // One's own role may have changed: the switcher and the pages follow.
      if (member.id === me.id) refreshTeams();
    } catch (caught) {
      setError(messageOf(caught));
      // The select shows what the server kept.
      replace({ ...member });
    } finally {
      setBusyId(undefined);
    }
  };

  const remove = async (member: TeamMember) => {
    setRemoving(undefined);
    setBusyId(member.id);
    setError(undefined);
    setStatus(undefined);
    try {
      await api('DELETE', `/teams/${encodeURIComponent(team.id)}/members/${encodeURIComponent(member.id)}`);
      detail.setData(
        (previous) => previous && { ...previous, members: previous.members.filter((m) => m.id !== member.id) },
      );
      setStatus(`${memberLabel(member)} was removed from ${name}.`);
      if (member.id === me.id) refreshTeams();
    } catch (caught) {
      setError(messageOf(caught));
    } finally {
      setBusyId(undefined);
    }
  };

  // A person's own account has them without a row (source null): never removed, never another role.
  const fixed = (member: TeamMember) => member.source === null;
  const columns: Array<Column<TeamMember> | false> = [
    {
      id: 'member',
      label: 'Member',
      lead: true,
      class: 'cell-strong team-member-cell',
      title: (member) => memberLabel(member),
      cell: (member) => (
        <>
          <span class="team-member-email">{memberLabel(member)}</span>
          {member.email && member.name && <span class="cell-sub muted">{member.name}</span>}
          {member.id === me.id && <span class="cell-sub muted">You</span>}
        </>
      ),
    },
    {
      id: 'role',
      label: 'Role',
      class: 'team-role-cell',
      cell: (member) =>
        manage && !fixed(member) ? (
          <RoleSelect
            id={`role-${member.id}`}
            value={member.role}
            disabled={busyId === member.id}
            onChange={(role) => void changeRole(member, role)}
          />
        ) : (
          roleNames[member.role]
        ),
    },
    {
      id: 'source',
      label: 'Added by',
      priority: 'wide',
      cell: (member) => (member.source ? sourceNames[member.source] : <span class="muted">Own account</span>),
    },
    { id: 'added', label: 'Added', priority: 'wide', class: 'nowrap', cell: (member) => dateTime(member.created) },
    manage && {
      id: 'actions',
      label: 'Actions',
      hideLabel: true,
      actions: true,
      class: 'row-actions',
      cell: (member) =>
        fixed(member) ? null : (
          <button
            type="button"
            class="button button-ghost-danger button-small"
            disabled={busyId === member.id}
            onClick={() => setRemoving(member)}
            aria-label={`Remove ${memberLabel(member)}`}
          >
            Remove
          </button>
        ),
    },
  ];

  return (
    <>
      <PageHeader
        title="Team"
        actions={
          manage &&
          team.kind === 'team' && (
            <button type="button" class="button button-secondary" onClick={() => setRenaming(true)}>
              Rename team
            </button>
          )
        }
        description={
          manage
            ? `Who works in ${name} and as what. Owners manage its members; members make keys of their own; ` +
              `viewers read its usage.`
            : `Who works in ${name}. You are ${team.role === 'member' ? 'a member' : 'a viewer'} here: its owners add and remove people.`
        }
      />
      <TableSection
        heading="members-heading"
        title={`Members of ${name}`}
        count={members && `${members.length} ${members.length === 1 ? 'person' : 'people'}`}
        status={status}
        error={error ?? detail.error}
        onDismiss={error ? () => setError(undefined) : undefined}
        class="table-compact team-table"
        columns={columns}
        rows={members}
        rowKey={(member) => member.id}
        skeletonRows={2}
        empty="Nobody is in this team yet."
      />
      {manage && (
        <AddMemberForm
          teamId={team.id}
          onStart={() => {
            setStatus(undefined);
            setError(undefined);
          }}
          onAdded={(member) => {
            detail.setData(
              (previous) =>
                previous && { ...previous, members: [...previous.members.filter((m) => m.id !== member.id), member] },
            );
            setStatus(`${memberLabel(member)} was added to ${name} as ${roleNames[member.role].toLowerCase()}.`);
            refreshTeams();
          }}
        />
      )}
      {me.role === 'admin' && (
        <AllTeams
          onStart={() => {
            setStatus(undefined);
            setError(undefined);
          }}
          onCreated={(created) => {
            setStatus(
              `Team “${created.name}” made${created.members.length ? ` with ${created.members.map(memberLabel).join(', ')} as owner` : ''}.`,
            );
            refreshTeams();
          }}
        />
      )}
      {renaming && (
        <RenameTeamDialog
          teamId={team.id}
          current={name}
          onClose={() => setRenaming(false)}
          onRenamed={(renamed) => {
            setRenaming(false);
            detail.setData(() => renamed);
            setStatus(`The team is now called “${renamed.name}”.`);
            refreshTeams();
          }}
        />
      )}
      {removing && (
        <Dialog title="Remove this member?" onClose={() => setRemoving(undefined)} alert>
          <p class="dialog-lead">
            <strong>{memberLabel(removing)}</strong> leaves {name} at once. The keys they made in it stay the team’s and
            keep working until an owner revokes them.
          </p>
          <div class="dialog-actions">
            <button type="button" class="button button-secondary" onClick={() => setRemoving(undefined)} autoFocus>
              Cancel
            </button>
            <button type="button" class="button button-danger" onClick={() => void remove(removing)}>
              Remove member
            </button>
          </div>
        </Dialog>
      )}
    </>
  );
}
