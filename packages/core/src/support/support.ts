/**
 * Support questions (threaded, per account) and feature requests (a public board with one upvote per
 * account). Operators answer and ship through the operator CLI (apps/server/src/cli.ts), which appends
 * support.answered and feature_request.shipped to the accounts concerned.
 */
import type { Db, FeatureRequest, SupportMessage, SupportQuestion } from '@boxes/db';
import { Prisma } from '@boxes/db';
import { appendEvent } from '../events/append';
import { AppError, notFound } from '../shared/errors';
import { newId } from '../shared/ids';
import type { FeatureRequestStatus, SupportQuestionStatus } from '@boxes/schemas';
import { FEATURE_REQUEST_STATUSES, SUPPORT_QUESTION_STATUSES } from '@boxes/schemas';
import { narrowStatus } from '../shared/statuses';

type QuestionWithThread = SupportQuestion & { messages: SupportMessage[] };

function presentBase(q: QuestionWithThread) {
  return {
    id: q.id,
    subject: q.subject,
    body: q.messages[0]?.body ?? '',
    context: (q.context as Record<string, unknown> | null) ?? null,
    status: narrowStatus(SUPPORT_QUESTION_STATUSES, q.status),
    created_at: q.createdAt.toISOString(),
    updated_at: q.updatedAt.toISOString(),
  };
}

export function presentThread(q: QuestionWithThread) {
  return {
    ...presentBase(q),
    messages: q.messages.map((m) => ({ id: m.id, author: m.author as 'agent' | 'operator', body: m.body, created_at: m.createdAt.toISOString() })),
  };
}

const presentSummary = (q: QuestionWithThread) => ({ ...presentBase(q), replies: Math.max(0, q.messages.length - 1) });

export async function askQuestion(db: Db, accountId: string, input: { subject: string; body: string; context?: Record<string, unknown> | undefined }) {
  return db.$transaction(async (tx) => {
    const id = newId('sq');
    const q = await tx.supportQuestion.create({
      data: {
        id,
        accountId,
        subject: input.subject,
        context: (input.context ?? Prisma.DbNull) as Prisma.InputJsonValue,
        messages: { create: { id: newId('sm'), author: 'agent', body: input.body } },
      },
      include: { messages: { orderBy: { createdAt: 'asc' } } },
    });
    await appendEvent({ db: tx, accountId, type: 'support.question_asked', data: { question_id: id, subject: input.subject } });
    return presentThread(q);
  });
}

export async function listQuestions(db: Db, accountId: string) {
  const qs = await db.supportQuestion.findMany({
    where: { accountId },
    orderBy: { createdAt: 'desc' },
    take: 200,
    include: { messages: { orderBy: { createdAt: 'asc' } } },
  });
  return qs.map(presentSummary);
}

export async function getQuestion(db: Db, accountId: string, id: string) {
  const q = await db.supportQuestion.findFirst({ where: { id, accountId }, include: { messages: { orderBy: { createdAt: 'asc' } } } });
  if (!q) throw notFound('support question', id);
  return presentThread(q);
}

export async function replyToQuestion(db: Db, accountId: string, id: string, body: string) {
  return db.$transaction(async (tx) => {
    const q = await tx.supportQuestion.findFirst({ where: { id, accountId } });
    if (!q) throw notFound('support question', id);
    await tx.supportMessage.create({ data: { id: newId('sm'), questionId: id, author: 'agent', body } });
    await tx.supportQuestion.update({ where: { id }, data: { status: 'open' satisfies SupportQuestionStatus } });
    const full = await tx.supportQuestion.findUniqueOrThrow({ where: { id }, include: { messages: { orderBy: { createdAt: 'asc' } } } });
    return presentThread(full);
  });
}

/** Operator side: the answer joins the thread and support.answered goes to the asking account. */
export async function answerQuestion(db: Db, id: string, body: string) {
  return db.$transaction(async (tx) => {
    const q = await tx.supportQuestion.findUnique({ where: { id } });
    if (!q) throw notFound('support question', id);
    const m = await tx.supportMessage.create({ data: { id: newId('sm'), questionId: id, author: 'operator', body } });
    await tx.supportQuestion.update({ where: { id }, data: { status: 'answered' satisfies SupportQuestionStatus } });
    await appendEvent({
      db: tx,
      accountId: q.accountId,
      type: 'support.answered',
      data: { question_id: id, subject: q.subject, answer: body, message_id: m.id, answered_at: m.createdAt.toISOString() },
    });
    return { question_id: id, account_id: q.accountId, message_id: m.id };
  });
}

export async function openQuestions(db: Db) {
  return db.supportQuestion.findMany({
    where: { status: 'open' satisfies SupportQuestionStatus },
    orderBy: { updatedAt: 'asc' },
    include: { messages: { orderBy: { createdAt: 'asc' } } },
  });
}

type FeatureWithVotes = FeatureRequest & { _count: { votes: number } };

function presentFeature(f: FeatureWithVotes, accountId: string, votedIds: Set<string>) {
  return {
    id: f.id,
    title: f.title,
    description: f.description,
    status: narrowStatus(FEATURE_REQUEST_STATUSES, f.status),
    votes: f._count.votes,
    voted: votedIds.has(f.id),
    mine: f.accountId === accountId,
    created_at: f.createdAt.toISOString(),
    shipped_at: f.shippedAt?.toISOString() ?? null,
  };
}

async function votedBy(db: Db, accountId: string, ids: string[]) {
  const rows = await db.featureVote.findMany({ where: { accountId, featureId: { in: ids } }, select: { featureId: true } });
  return new Set(rows.map((r) => r.featureId));
}

export async function requestFeature(db: Db, accountId: string, input: { title: string; description: string }) {
  const f = await db.$transaction(async (tx) => {
    const created = await tx.featureRequest.create({ data: { id: newId('fr'), accountId, title: input.title, description: input.description } });
    await appendEvent({ db: tx, accountId, type: 'feature_request.created', data: { feature_request_id: created.id, title: created.title } });
    return created;
  });
  return presentFeature({ ...f, _count: { votes: 0 } }, accountId, new Set());
}

export async function listFeatures(db: Db, accountId: string) {
  const fs = await db.featureRequest.findMany({ orderBy: { createdAt: 'desc' }, take: 500, include: { _count: { select: { votes: true } } } });
  const voted = await votedBy(
    db,
    accountId,
    fs.map((f) => f.id),
  );
  return fs.map((f) => presentFeature(f, accountId, voted));
}

export async function getFeature(db: Db, accountId: string, id: string) {
  const f = await db.featureRequest.findUnique({ where: { id }, include: { _count: { select: { votes: true } } } });
  if (!f) throw notFound('feature request', id);
  return presentFeature(f, accountId, await votedBy(db, accountId, [id]));
}

export async function voteFeature(db: Db, accountId: string, id: string) {
  const f = await db.featureRequest.findUnique({ where: { id }, select: { id: true } });
  if (!f) throw notFound('feature request', id);
  try {
    await db.featureVote.create({ data: { featureId: id, accountId } });
  } catch (err) {
    if (err instanceof Prisma.PrismaClientKnownRequestError && err.code === 'P2002') {
      throw new AppError('already_voted', 'This account has already upvoted this feature request (one vote per account)', { feature_request_id: id });
    }
    throw err;
  }
  return getFeature(db, accountId, id);
}

/** Operator side: marks a request shipped and tells the requester and every voter. */
export async function shipFeature(db: Db, id: string, note?: string) {
  return db.$transaction(async (tx) => {
    const f = await tx.featureRequest.findUnique({ where: { id }, include: { votes: { select: { accountId: true } } } });
    if (!f) throw notFound('feature request', id);
    if (f.status === 'shipped') return { id, notified: 0 };
    const shippedAt = new Date();
    await tx.featureRequest.update({ where: { id }, data: { status: 'shipped' satisfies FeatureRequestStatus, shippedAt } });
    const accounts = [...new Set([f.accountId, ...f.votes.map((v) => v.accountId)])];
    for (const accountId of accounts) {
      await appendEvent({
        db: tx,
        accountId,
        type: 'feature_request.shipped',
        data: { feature_request_id: id, title: f.title, shipped_at: shippedAt.toISOString(), note: note ?? null, requested_by_you: accountId === f.accountId },
      });
    }
    return { id, notified: accounts.length };
  });
}

export async function openFeatures(db: Db) {
  return db.featureRequest.findMany({
    where: { status: 'open' satisfies FeatureRequestStatus },
    orderBy: { createdAt: 'asc' },
    include: { _count: { select: { votes: true } } },
  });
}

export async function saveMcpFeedback(db: Db, accountId: string, notes: Record<string, unknown>) {
  const id = newId('fb');
  const row = await db.mcpFeedback.create({ data: { id, accountId, notes: notes as Prisma.InputJsonValue } });
  return { receipt_id: row.id, received_at: row.createdAt.toISOString() };
}
