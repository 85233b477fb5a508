/** Support questions and feature requests: the only channel to the operators. Any valid key. */
import { z } from 'zod';
import { askQuestion, getFeature, getQuestion, listFeatures, listQuestions, replyToQuestion, requestFeature, voteFeature } from '@boxes/core';
import {
  AskQuestionInput,
  FeatureIdInput,
  FeatureListOutput,
  FeatureRequestInput,
  FeatureRequestOutput,
  QuestionIdInput,
  QuestionListOutput,
  QuestionOutput,
  ReplyInput,
} from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

export const supportRouter = router({
  ask: keyProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/support/questions',
        tags: ['support'],
        summary: 'Ask the operators',
        description: 'The answer arrives as a support.answered event (and in the thread). There is no support email address: this is the channel.',
      },
    })
    .input(AskQuestionInput)
    .output(QuestionOutput)
    .mutation(({ ctx, input }) => askQuestion(ctx.svc.db, ctx.account.id, input)),
  list: keyProcedure
    .meta({ openapi: { method: 'GET', path: '/support/questions', tags: ['support'], summary: 'Your questions' } })
    .input(z.void())
    .output(QuestionListOutput)
    .query(async ({ ctx }) => ({ questions: await listQuestions(ctx.svc.db, ctx.account.id) })),
  get: keyProcedure
    .meta({ errors: ['not_found'], openapi: { method: 'GET', path: '/support/questions/{id}', tags: ['support'], summary: 'A question with its thread' } })
    .input(QuestionIdInput)
    .output(QuestionOutput)
    .query(({ ctx, input }) => getQuestion(ctx.svc.db, ctx.account.id, input.id)),
  reply: keyProcedure
    .meta({
      errors: ['not_found'],
      openapi: { method: 'POST', path: '/support/questions/{id}/replies', tags: ['support'], summary: 'Follow up on a question' },
    })
    .input(ReplyInput)
    .output(QuestionOutput)
    .mutation(({ ctx, input }) => replyToQuestion(ctx.svc.db, ctx.account.id, input.id, input.body)),
});

export const featuresRouter = router({
  create: keyProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/feature-requests',
        tags: ['feature requests'],
        summary: 'Request a feature',
        description: 'title at least 5 characters, description at least 20; 400 otherwise. feature_request.shipped announces it.',
      },
    })
    .input(FeatureRequestInput)
    .output(FeatureRequestOutput)
    .mutation(({ ctx, input }) => requestFeature(ctx.svc.db, ctx.account.id, input)),
  list: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/feature-requests',
        tags: ['feature requests'],
        summary: 'The feature board',
        description: "Every account's requests, newest first, with votes.",
      },
    })
    .input(z.void())
    .output(FeatureListOutput)
    .query(async ({ ctx }) => ({ feature_requests: await listFeatures(ctx.svc.db, ctx.account.id) })),
  get: keyProcedure
    .meta({ errors: ['not_found'], openapi: { method: 'GET', path: '/feature-requests/{id}', tags: ['feature requests'], summary: 'One feature request' } })
    .input(FeatureIdInput)
    .output(FeatureRequestOutput)
    .query(({ ctx, input }) => getFeature(ctx.svc.db, ctx.account.id, input.id)),
  vote: keyProcedure
    .meta({
      errors: ['already_voted', 'not_found'],
      openapi: {
        method: 'POST',
        path: '/feature-requests/{id}/vote',
        tags: ['feature requests'],
        summary: 'Upvote',
        description: 'One vote per account; a second one is 409 already_voted.',
      },
    })
    .input(FeatureIdInput)
    .output(FeatureRequestOutput)
    .mutation(({ ctx, input }) => voteFeature(ctx.svc.db, ctx.account.id, input.id)),
});
