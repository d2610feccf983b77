export { createDashboard, type DashboardHandler, type DashboardOptions } from './dashboard.js'
