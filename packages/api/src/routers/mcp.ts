/** MCP management (/account/mcp/*) and the back-compat /beta/mcp/* calls. */
import { mcpStatus, saveMcpFeedback, setMcpEnabled } from '@boxes/core';
import { McpFeedbackInput, McpFeedbackOutput, McpStatusOutput } from '@boxes/schemas';
import { z } from 'zod';
import { keyProcedure, router } from '../trpc';

export const mcpRouter = router({
  status: keyProcedure
    .meta({ openapi: { method: 'GET', path: '/account/mcp/status', tags: ['mcp'], summary: 'MCP access', description: 'Open to every key unless disabled.' } })
    .input(z.void())
    .output(McpStatusOutput)
    .query(({ ctx }) => mcpStatus(ctx.svc.db, ctx.account.id)),
  enable: keyProcedure
    .meta({
      scope: 'admin',
      accountWide: true,
      openapi: { method: 'POST', path: '/account/mcp/enable', tags: ['mcp'], summary: 'Enable MCP', description: 'Clears disabled_at; account.mcp.enabled.' },
    })
    .input(z.void())
    .output(McpStatusOutput)
    .mutation(({ ctx }) => setMcpEnabled(ctx.svc.db, ctx.account.id, true, ctx.key.id)),
  disable: keyProcedure
    .meta({
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'POST',
        path: '/account/mcp/disable',
        tags: ['mcp'],
        summary: 'Disable MCP',
        description: 'Stamps disabled_at (enrolled_at is kept); MCP calls are refused until enabled again; account.mcp.disabled.',
      },
    })
    .input(z.void())
    .output(McpStatusOutput)
    .mutation(({ ctx }) => setMcpEnabled(ctx.svc.db, ctx.account.id, false, ctx.key.id)),
  betaOptIn: keyProcedure
    .meta({
      scope: 'admin',
      openapi: {
        method: 'POST',
        path: '/beta/mcp/opt-in',
        tags: ['mcp'],
        summary: 'Back-compat no-op',
        description: 'MCP is generally available; returns the current status and changes nothing.',
        deprecated: true,
      },
    })
    .input(z.void())
    .output(McpStatusOutput)
    .mutation(({ ctx }) => mcpStatus(ctx.svc.db, ctx.account.id)),
  betaStatus: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/beta/mcp/status',
        tags: ['mcp'],
        summary: 'Back-compat status',
        description: 'Same as GET /account/mcp/status.',
        deprecated: true,
      },
    })
    .input(z.void())
    .output(McpStatusOutput)
    .query(({ ctx }) => mcpStatus(ctx.svc.db, ctx.account.id)),
  feedback: keyProcedure
    .meta({
      openapi: { method: 'POST', path: '/beta/mcp/feedback', tags: ['mcp'], summary: 'Feedback on MCP', description: 'Free-form notes; returns a receipt.' },
    })
    .input(McpFeedbackInput)
    .output(McpFeedbackOutput)
    .mutation(({ ctx, input }) => saveMcpFeedback(ctx.svc.db, ctx.account.id, input)),
});
