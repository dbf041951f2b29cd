-- The shop's dashboard: counts and sums over customers, their orders and line items.
SELECT segment, region, COUNT(*) FROM customers GROUP BY segment, region;

SELECT c.segment, o.status, COUNT(*)
FROM customers c JOIN orders o ON o.custkey = c.custkey
GROUP BY c.segment, o.status;

SELECT o.year, COUNT(*) FROM orders o GROUP BY o.year;

SELECT c.region, o.year, COUNT(*)
FROM customers c JOIN orders o ON o.custkey = c.custkey
GROUP BY c.region, o.year;

SELECT l.returnflag, COUNT(*), SUM(l.quantity)
FROM orders o JOIN lineitem l ON l.orderkey = o.orderkey
GROUP BY l.returnflag;

SELECT c.segment, SUM(l.quantity), AVG(l.discount)
FROM customers c JOIN orders o ON o.custkey = c.custkey
                 JOIN lineitem l ON l.orderkey = o.orderkey
GROUP BY c.segment;

SELECT o.year, l.returnflag, COUNT(*)
FROM customers c JOIN orders o ON o.custkey = c.custkey
                 JOIN lineitem l ON l.orderkey = o.orderkey
WHERE o.priority <= 2
GROUP BY o.year, l.returnflag;

-- persons, not rows: customers who ordered, by region (one row per customer: sensitivity 1)
SELECT c.region, COUNT(DISTINCT c.custkey) AS buyers
FROM customers c JOIN orders o ON o.custkey = c.custkey
GROUP BY c.region;
