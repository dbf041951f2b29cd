-- A small dashboard over the NLTCS disability indicators (1 = limitation): prevalence of
-- each limitation and a few co-occurrences.
SELECT COUNT(*) FROM nltcs;
SELECT eating, COUNT(*) FROM nltcs GROUP BY eating;
SELECT bathing, COUNT(*) FROM nltcs GROUP BY bathing;
SELECT dressing, COUNT(*) FROM nltcs GROUP BY dressing;
SELECT traveling, COUNT(*) FROM nltcs GROUP BY traveling;
SELECT managing_money, COUNT(*) FROM nltcs GROUP BY managing_money;
SELECT bathing, dressing, COUNT(*) FROM nltcs GROUP BY bathing, dressing;
SELECT cooking, grocery_shopping, COUNT(*) FROM nltcs GROUP BY cooking, grocery_shopping;
SELECT laundry, light_house_work, heavy_house_work, COUNT(*) FROM nltcs GROUP BY laundry, light_house_work, heavy_house_work;
SELECT COUNT(*) FROM nltcs WHERE eating = 1 AND using_toilet = 1;
SELECT telephoning, COUNT(*) FROM nltcs WHERE traveling = 1 GROUP BY telephoning;
SELECT taking_medicine, COUNT(*) FROM nltcs WHERE managing_money = 1 GROUP BY taking_medicine;
